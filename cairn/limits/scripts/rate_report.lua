-- KEYS: per bucket its four keys (as take_rate.lua). Returns per bucket: requests limit,
-- period (ms), requests in the window, tokens limit, period, tokens in the window,
-- calls holding units for a time to come, ms the bucket stays paused.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS / 4 do
  local meta, requests, tokens, amounts = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local v = redis.call('hmget', meta, 'rl', 'rp', 'tl', 'tp', 'paused')
  local rl, rp, tl, tp = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0'), tonumber(v[4] or '0')
  local used_r = 0
  if rl > 0 then used_r = redis.call('zcount', requests, '(' .. (now - rp), now) end
  local used_t = 0
  if tl > 0 then
    local held = redis.call('zrangebyscore', tokens, '(' .. (now - tp), now)
    for first = 1, #held, 1000 do
      local part = {}
      for j = first, math.min(first + 999, #held) do part[#part + 1] = held[j] end
      for _, a in ipairs(redis.call('hmget', amounts, unpack(part))) do
        used_t = used_t + (tonumber(a) or 0)
      end
    end
  end
  local waiting = math.max(redis.call('zcount', requests, '(' .. now, '+inf'),
                           redis.call('zcount', tokens, '(' .. now, '+inf'))
  local paused = math.max(0, tonumber(v[5] or '0') - now)
  for _, x in ipairs({rl, rp, used_r, tl, tp, used_t, waiting, paused}) do out[#out + 1] = x end
end
return out
