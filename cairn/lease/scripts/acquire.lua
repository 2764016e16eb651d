-- KEYS: lease, beat, stats, fence, waits, claims. ARGV: token ("<attempt>:<random>"),
-- ttl_ms, beat_ttl_ms, floor, fence_ttl_ms, wait bucket ('' if the wait is unknown),
-- wait_s, field, value, ... Returns {the claim's fence (0 if the lease is held), 1 if a
-- dead holder's heartbeat record was there, 1 if an older attempt's lease was superseded,
-- 1 if the previous claim lapsed}.
local superseded = 0
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local mine = tonumber(string.match(ARGV[1], '^(%d+):'))
  local theirs = tonumber(string.match(redis.call('get', KEYS[1]) or '', '^(%d+):'))
  if not (mine and theirs and mine > theirs) then
    redis.call('hincrby', KEYS[3], 'contended', 1)
    return {0, 0, 0, 0}
  end
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('hincrby', KEYS[3], 'superseded', 1)
  superseded = 1
end
redis.call('hincrby', KEYS[3], 'acquired', 1)
if ARGV[6] ~= '' then
  redis.call('hincrby', KEYS[5], ARGV[6], 1)
  redis.call('hincrbyfloat', KEYS[5], 'sum', ARGV[7])
end
local fence = redis.call('incr', KEYS[4])
if fence <= tonumber(ARGV[4]) then
  fence = tonumber(ARGV[4]) + 1
  redis.call('set', KEYS[4], fence)
end
redis.call('pexpire', KEYS[4], ARGV[5])
local t = redis.call('time')
local now = string.format('%d.%06d', t[1], t[2])
-- A superseded attempt's record is its own, not a dead holder's.
local orphaned = redis.call('del', KEYS[2])
if superseded == 1 then orphaned = 0 end
-- A claim whose lease is gone and which was not released: its holder was lost. Still in
-- the set even once a sweep has taken it (held back until settled), so this claim knows
-- it resumes before the sweep has counted the recovery.
local lapsed = orphaned
if superseded == 0 and redis.call('zscore', KEYS[6], KEYS[1]) then lapsed = 1 end
redis.call('hset', KEYS[2], 'beat_at', now, 'started_at', now, 'progress_at', now,
  'fence', fence, unpack(ARGV, 8))
redis.call('pexpire', KEYS[2], ARGV[3])
redis.call('zadd', KEYS[6], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), KEYS[1])
return {fence, orphaned, superseded, lapsed}
