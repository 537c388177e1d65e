// Copies the Lua scripts next to the compiled store, so `dist/` loads them like `src/` does.
import { cpSync } from 'node:fs'

cpSync('src/stores/redis/scripts', 'dist/src/stores/redis/scripts', {
  recursive: true,
  filter: (source) => !source.includes('.') || source.endsWith('.lua'),
})
