-- KEYS: claims. ARGV: limit, hold_ms. Takes the claims whose lease ran out unreleased,
-- each with its heartbeat record, which goes: whoever takes a lapsed claim — this or a
-- worker's acquire, which finds the record — is the one that counts the death. The claim
-- itself is only put hold_ms ahead, until the taker has dealt with it (SETTLE_LAPSED): a
-- scheduler that dies meanwhile leaves it to be taken again. The beat key is derived
-- from the lease key, so this needs one Redis, not a cluster.
local t = redis.call('time')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local due = redis.call('zrangebyscore', KEYS[1], '-inf', now_ms, 'LIMIT', 0, ARGV[1])
local taken = {}
for _, lease in ipairs(due) do
  local left = redis.call('pttl', lease)
  if left > 0 then
    redis.call('zadd', KEYS[1], now_ms + left, lease)  -- still held: its score was behind
  else
    local beat = 'cairn:beat:' .. string.sub(lease, string.len('cairn:lease:') + 1)
    local record = redis.call('hgetall', beat)
    redis.call('del', beat)
    redis.call('zadd', KEYS[1], now_ms + tonumber(ARGV[2]), lease)
    table.insert(taken, {lease, record})
  end
end
return taken
