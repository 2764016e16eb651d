-- Shared by the slot scripts (prepended to each): how many live leases hold a slot of
-- ``pool``; a member counts while its lease key holds its token, the others are dropped.
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
