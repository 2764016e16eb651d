-- KEYS: lease, beat, stats, claims. ARGV: token, ttl_ms (0: a beat, no renewal),
-- beat_ttl_ms, "1" if the handler made progress, field, value, ...
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  redis.call('hincrby', KEYS[3], 'lost', 1)
  return 0
end
local t = redis.call('time')
if tonumber(ARGV[2]) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('hincrby', KEYS[3], 'renewed', 1)
  redis.call('zadd', KEYS[4], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), KEYS[1])
end
local now = string.format('%d.%06d', t[1], t[2])
redis.call('hset', KEYS[2], 'beat_at', now, unpack(ARGV, 5))
if ARGV[4] == '1' then
  redis.call('hset', KEYS[2], 'progress_at', now)
  redis.call('hdel', KEYS[2], 'stalled')
end
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
