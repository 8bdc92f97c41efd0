-- A script that fails at run time on a known line (line 10: indexing a nil
-- field inside a nested function call). The launcher must exit non-zero and
-- print the message positioned at runtime_error.lua:10 and a stack traceback
-- through both functions (tests/CMakeLists: lua_runtime_error).
local ptdp = require 'ptdp'
assert(ptdp.version() ~= '')

local function inner(t)
  local depth = 1
  return t.missing.field + depth -- line 10: t.missing is nil
end

local function outer()
  return inner({}) + 1 -- line 14
end

print('before the error')
outer() -- line 18
print('not reached')
