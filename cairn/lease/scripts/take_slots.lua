-- KEYS: the pools' sorted sets, then the hash of contended pools. ARGV: the holder
-- ("<lease key>|<token>"), then each pool's limit. Returns 0 with a slot of every pool
-- taken; the (1-based) index of the first full pool, with none taken and that pool's
-- contention counter bumped (whoever gives a slot of it back looks for its waiters); or
-- -1 if the holder's lease is not live (the first pool's counter bumped: it is the one a
-- caller waits for then). (live() is slots_live.lua's.)
local mine = ARGV[1]
local lease_key, token = string.match(mine, '^(.*)|([^|]*)$')
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local contended = KEYS[#KEYS]

if redis.call('get', lease_key) ~= token then
  redis.call('hincrby', contended, KEYS[1], 1)  -- it waits for the first pool
  return -1
end
for i = 1, #KEYS - 1 do
  local pool = KEYS[i]
  if not redis.call('zscore', pool, mine) and live(pool) >= tonumber(ARGV[i + 1]) then
    redis.call('hincrby', contended, pool, 1)
    return i
  end
end
for i = 1, #KEYS - 1 do
  redis.call('zadd', KEYS[i], 'NX', now, mine)
end
return 0
