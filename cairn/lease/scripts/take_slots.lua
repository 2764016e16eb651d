-- KEYS: the pools' sorted sets. ARGV: the member ("<lease key>|<token>"), then each
-- pool's limit. A member counts while its lease key holds its token; the others are
-- dropped as they are met. Returns 0 with a slot of every pool taken, or the (1-based)
-- index of the first full pool, with none taken.
local mine = ARGV[1]
local lease_key, token = string.match(mine, '^(.*)|([^|]*)$')
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local function live(pool)
  local count = 0
  for _, held in ipairs(redis.call('zrange', pool, 0, -1)) do
    local key, its = string.match(held, '^(.*)|([^|]*)$')
    if key and redis.call('get', key) == its then
      count = count + 1
    else
      redis.call('zrem', pool, held)
    end
  end
  return count
end

if redis.call('get', lease_key) ~= token then
  return -1 -- the lease is not (or no longer) this holder's
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
