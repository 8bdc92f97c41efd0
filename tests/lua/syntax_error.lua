-- A script that does not parse: the launcher must exit non-zero with the
-- parser's message positioned at syntax_error.lua:6 (tests/CMakeLists:
-- lua_syntax_error). Nothing of it runs.
print('not reached')
local ok = true
local x = = 2
