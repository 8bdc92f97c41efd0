-- Helpers shared by the Lua test scripts (found through the launcher's
-- package.path, which includes the script's own directory).
local M = {}

M.checks = 0

-- Prints "ok   what" or raises an error naming the check.
function M.check(cond, what)
  M.checks = M.checks + 1
  if not cond then error('check failed: ' .. what, 2) end
  print('ok   ' .. what)
end

-- Calls fn(...) expecting it to raise an error containing `needle` (a plain
-- string); returns the message.
function M.expect_error(needle, what, fn, ...)
  local ok, err = pcall(fn, ...)
  M.checks = M.checks + 1
  if ok then error('check failed: ' .. what .. ': no error raised', 2) end
  err = tostring(err)
  if not err:find(needle, 1, true) then
    error(string.format("check failed: %s: error %q does not contain %q", what, err, needle), 2)
  end
  print('ok   ' .. what .. ' -> ' .. err:sub(1, 160))
  return err
end

local function read_all(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end
M.read_all = read_all

local function write_all(path, s)
  local f = assert(io.open(path, 'wb'))
  assert(f:write(s))
  assert(f:close())
end
M.write_all = write_all

-- Copies src to dst without its last `drop` bytes.
function M.truncated_copy(src, dst, drop)
  local s = read_all(src)
  write_all(dst, s:sub(1, #s - drop))
  return #s
end

-- Little-endian unsigned integers (values below 2^53).
local function le(n, bytes)
  local t = {}
  for i = 1, bytes do
    t[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(t)
end

-- Writes a ptdp token dataset (layout of engine/data/dataset.h) by hand: one
-- document holding `tokens` (2-byte ids), declaring vocabulary `vocab`.
function M.write_dataset(path, vocab, tokens)
  local parts = { 'PTDPTOK\0', le(1, 4), le(2, 4), le(vocab, 4), le(0, 4), le(1, 8),
                  le(#tokens, 8), string.rep('\0', 24), le(0, 8), le(#tokens, 8) }
  for _, t in ipairs(tokens) do parts[#parts + 1] = le(t, 2) end
  write_all(path, table.concat(parts))
end

-- Command-line arguments the test scripts take: CORPUS TMPDIR, from arg[first]
-- on (default 1); makes TMPDIR.
function M.args(name, first)
  first = first or 1
  local corpus, tmpdir = arg[first], arg[first + 1]
  if not corpus or not tmpdir then
    io.stderr:write('usage: ptdp ' .. name .. ' CORPUS.txt TMPDIR\n')
    os.exit(2)
  end
  os.execute('mkdir -p "' .. tmpdir .. '"')
  return corpus, tmpdir
end

-- A copy of config table `base` (groups copied one level deep) with `changes`
-- applied: a group in changes overrides only the keys it names.
function M.merged(base, changes)
  local t = {}
  for k, v in pairs(base) do
    if type(v) == 'table' then
      t[k] = {}
      for k2, v2 in pairs(v) do t[k][k2] = v2 end
    else
      t[k] = v
    end
  end
  for k, v in pairs(changes or {}) do
    if type(v) == 'table' and type(t[k]) == 'table' then
      for k2, v2 in pairs(v) do t[k][k2] = v2 end
    else
      t[k] = v
    end
  end
  return t
end

return M
