-- KEYS: circuits' hashes. Returns each one's pool limit now: -1 closed (no limit), 0 open,
-- 1 half-open (its open_for is over: one probe may run). The Redis server's clock.
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limits = {}
for i, key in ipairs(KEYS) do
  local open_until = redis.call('hget', key, 'open_until')
  if not open_until then
    limits[i] = -1
  elseif now < tonumber(open_until) then
    limits[i] = 0
  else
    limits[i] = 1
  end
end
return limits
