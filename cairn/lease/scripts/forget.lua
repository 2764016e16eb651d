-- KEYS: claims, lease, beat. ARGV: hold_ms. A recovery found a dead holder's heartbeat
-- record outliving its lease: the record goes (the caller counts the death), and the
-- claim, if the set has it, is held back hold_ms like a taken lapsed one until
-- SETTLE_LAPSED, so that a worker claiming the lease meanwhile knows it resumes. Returns
-- 0, changing nothing, if the lease is held again: that worker took the node over.
if redis.call('exists', KEYS[2]) == 1 then
  return 0
end
redis.call('del', KEYS[3])
local t = redis.call('time')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('zadd', KEYS[1], 'XX', now_ms + tonumber(ARGV[1]), KEYS[2])
return 1
