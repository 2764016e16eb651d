-- A run's attempt failed transiently against a dependency. KEYS: its circuit's hash, its
-- failures' sorted set (run id -> when, ms). ARGV: run id, failures that open it, window
-- (ms), open_for (ms). Returns 1 if this failure opened the circuit, 2 if it opened it
-- again (it was half-open: the probe failed), else 0. The Redis server's clock.
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local open_until = redis.call('hget', KEYS[1], 'open_until')
if open_until then
  redis.call('hincrby', KEYS[1], 'failures', 1)
  if now >= tonumber(open_until) then
    redis.call('hset', KEYS[1], 'open_until', now + tonumber(ARGV[4]))
    redis.call('hincrby', KEYS[1], 'opens', 1)
    return 2
  end
  return 0  -- an attempt that began before it opened
end
redis.call('zadd', KEYS[2], now, ARGV[1])
redis.call('zremrangebyscore', KEYS[2], '-inf', now - tonumber(ARGV[3]))
redis.call('pexpire', KEYS[2], tonumber(ARGV[3]))
local failed = redis.call('zcard', KEYS[2])
if failed >= tonumber(ARGV[2]) then
  redis.call('hset', KEYS[1], 'opened_at', now, 'open_until', now + tonumber(ARGV[4]),
    'opens', 1, 'failures', failed)
  redis.call('del', KEYS[2])
  return 1
end
return 0
