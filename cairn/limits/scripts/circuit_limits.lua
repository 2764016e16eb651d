-- KEYS: circuits' hashes, then their failures' sorted sets (as many, in the same order).
-- Returns each one's pool limit now: -1 closed (no limit) with no failure counted, -2
-- closed with failures counted, 0 open, 1 half-open (its open_for is over: one probe
-- may run). The Redis server's clock.
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = #KEYS / 2
local limits = {}
for i = 1, n do
  local open_until = redis.call('hget', KEYS[i], 'open_until')
  if not open_until then
    limits[i] = redis.call('exists', KEYS[n + i]) == 1 and -2 or -1
  elseif now < tonumber(open_until) then
    limits[i] = 0
  else
    limits[i] = 1
  end
end
return limits
