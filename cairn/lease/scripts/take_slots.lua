-- KEYS: the pools' sorted sets. ARGV: the holder ("<lease key>|<token>"), then each
-- pool's limit. Returns 0 with a slot of every pool taken, the (1-based) index of the
-- first full pool with none taken, or -1 if the holder's lease is not live. (live() is
-- slots_live.lua's.)
local mine = ARGV[1]
local lease_key, token = string.match(mine, '^(.*)|([^|]*)$')
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

if redis.call('get', lease_key) ~= token then
  return -1
end
for i, pool in ipairs(KEYS) do
  if not redis.call('zscore', pool, mine) and live(pool) >= tonumber(ARGV[i + 1]) then
    return i
  end
end
for _, pool in ipairs(KEYS) do
  redis.call('zadd', pool, 'NX', now, mine)
end
return 0
