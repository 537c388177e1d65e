#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
/* Shifts the wall clock by the milliseconds in $CLOCK_SHIFT_FILE, read at every call. */
static long long shift_ms(void) {
  const char *file = getenv("CLOCK_SHIFT_FILE");
  if (file == NULL) return 0;
  FILE *fp = fopen(file, "r");
  if (fp == NULL) return 0;
  long long v = 0;
  if (fscanf(fp, "%lld", &v) != 1) v = 0;
  fclose(fp);
  return v;
}
int gettimeofday(struct timeval *tv, void *tz) {
  static int (*real)(struct timeval *, void *);
  if (real == NULL) real = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
  int r = real(tv, tz);
  if (r == 0 && tv != NULL) {
    long long us = (long long)tv->tv_sec * 1000000 + tv->tv_usec + shift_ms() * 1000;
    tv->tv_sec = us / 1000000;
    tv->tv_usec = us % 1000000;
  }
  return r;
}
int clock_gettime(clockid_t clock, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (real == NULL) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  int r = real(clock, ts);
  if (r == 0 && ts != NULL && clock == CLOCK_REALTIME) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + shift_ms() * 1000000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
  }
  return r;
}
