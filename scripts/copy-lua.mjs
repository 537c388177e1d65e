// Copies the Lua scripts and the PostgreSQL migrations (the numbered SQL files) next to the compiled stores, so `dist/`
// loads them like `src/` does.
import { cpSync } from 'node:fs'

cpSync('src/stores/redis/scripts', 'dist/src/stores/redis/scripts', {
  recursive: true,
  filter: (source) => !source.includes('.') || source.endsWith('.lua'),
})
cpSync('src/stores/postgres/sql', 'dist/src/stores/postgres/sql', { recursive: true })
