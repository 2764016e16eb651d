-- KEYS: for each bucket, four keys: its hash (paused, the limits last declared), the
-- sorted set of its requests and that of its token reservations (member: the call,
-- score: when its units were taken, ms by this server's clock), the hash of each
-- reservation's tokens. ARGV: the call, its tokens, how long after its units' time a
-- call may confirm them (ms), then per bucket: requests limit, period (ms), tokens
-- limit, period (ms) (0: no such limit).
-- Returns 0: taken (or confirmed), go. Else the ms to wait: the units are the call's
-- at that time; the caller takes again then, to confirm them. A confirmation later than
-- that (or after a pause came) is too late for those units: the call takes anew.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local call, want, within = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = #KEYS / 4

local function limits(i)
  local base = 3 + (i - 1) * 4
  return tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]),
         tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
end

-- hmget/hdel of many fields, in batches (Lua's unpack is limited to a few thousand)
local function batched(command, key, fields)
  local out = {}
  for first = 1, #fields, 1000 do
    local part = {}
    for j = first, math.min(first + 999, #fields) do part[#part + 1] = fields[j] end
    local got = redis.call(command, key, unpack(part))
    if type(got) == 'table' then for _, x in ipairs(got) do out[#out + 1] = x end end
  end
  return out
end

local paused = 0
local at = nil
for i = 1, n do
  local p = tonumber(redis.call('hget', KEYS[4 * i - 3], 'paused') or '0')
  if p > paused then paused = p end
  if at == nil then
    local s = redis.call('zscore', KEYS[4 * i - 2], call) or redis.call('zscore', KEYS[4 * i - 1], call)
    if s then at = tonumber(s) end
  end
end

if at ~= nil then  -- a confirmation
  if at <= now then
    if paused <= now and now - at <= within then return 0 end
  elseif paused <= at then
    return at - now
  end
  for i = 1, n do  -- too late for its time, or a pause came after it: it queues anew
    redis.call('zrem', KEYS[4 * i - 2], call)
    redis.call('zrem', KEYS[4 * i - 1], call)
    redis.call('hdel', KEYS[4 * i], call)
  end
end

local start = math.max(now, paused)
local keep = 0
local wants = {}
for i = 1, n do
  local meta, requests, tokens, amounts = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local rl, rp, tl, tp = limits(i)
  -- Units are kept for the longest period any caller declared for the key (another
  -- definition may name it with a longer one): only the counting is by this caller's.
  local kept = redis.call('hmget', meta, 'kr', 'kt')
  local kr = math.max(rp, tonumber(kept[1] or '0') or 0)
  local kt = math.max(tp, tonumber(kept[2] or '0') or 0)
  redis.call('hset', meta, 'rl', rl, 'rp', rp, 'tl', tl, 'tp', tp, 'kr', kr, 'kt', kt)
  keep = math.max(keep, kr, kt)
  if rl > 0 then
    redis.call('zremrangebyscore', requests, '-inf', '(' .. (now - kr))
    if redis.call('zcard', requests) >= rl then
      -- the rl-th newest must be out of the window: one period after it
      local e = redis.call('zrevrange', requests, rl - 1, rl - 1, 'withscores')
      start = math.max(start, tonumber(e[2]) + rp)
    end
    local last = redis.call('zrevrange', requests, 0, 0, 'withscores')
    if last[2] then start = math.max(start, tonumber(last[2])) end
  end
  if tl > 0 then
    local old = redis.call('zrangebyscore', tokens, '-inf', '(' .. (now - kt))
    if #old > 0 then
      batched('hdel', amounts, old)
      redis.call('zremrangebyscore', tokens, '-inf', '(' .. (now - kt))
    end
    local w = math.min(want, tl)
    wants[i] = w
    local held = redis.call('zrevrange', tokens, 0, -1, 'withscores')
    if #held > 0 then
      start = math.max(start, tonumber(held[2]))
      local names = {}
      for j = 1, #held, 2 do names[#names + 1] = held[j] end
      local amount = batched('hmget', amounts, names)
      local acc = 0
      for j = 1, #names do
        local a = tonumber(amount[j] or '0') or 0
        if acc + a + w > tl then  -- this one and every older must be out of the window
          start = math.max(start, tonumber(held[2 * j]) + tp)
          break
        end
        acc = acc + a
      end
    end
  end
end

for i = 1, n do
  local meta, requests, tokens, amounts = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local rl, rp, tl, tp = limits(i)
  if rl > 0 then redis.call('zadd', requests, start, call) end
  if tl > 0 then
    redis.call('zadd', tokens, start, call)
    redis.call('hset', amounts, call, wants[i])
  end
  local ttl = (start - now) + 2 * keep + 60000
  for _, key in ipairs({meta, requests, tokens, amounts}) do redis.call('pexpire', key, ttl) end
end
return start - now
