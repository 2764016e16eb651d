-- KEYS: lease, beat, fence, step histograms, claims. ARGV: token, "1" if the holder's
-- result is committed, the fence's remaining life then (ms), then (histogram field,
-- amount) pairs.
for i = 4, #ARGV, 2 do
  redis.call('hincrbyfloat', KEYS[4], ARGV[i], ARGV[i + 1])
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[2])
  redis.call('zrem', KEYS[5], KEYS[1])
  if ARGV[2] == '1' then
    redis.call('pexpire', KEYS[3], ARGV[3])
  end
  return redis.call('del', KEYS[1])
end
return 0
