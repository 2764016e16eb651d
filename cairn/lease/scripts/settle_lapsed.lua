-- KEYS: claims, lease. A lapsed claim dealt with leaves the set — unless a new holder
-- has claimed the lease since (its claim is the member now).
if redis.call('exists', KEYS[2]) == 0 then
  return redis.call('zrem', KEYS[1], KEYS[2])
end
return 0
