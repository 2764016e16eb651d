-- KEYS: the pools' sorted sets. Returns how many live leases hold a slot of each (live()
-- is slots_live.lua's).
local counts = {}
for i, pool in ipairs(KEYS) do
  counts[i] = live(pool)
end
return counts
