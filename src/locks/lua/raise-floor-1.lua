--[[
  Raise the token counter to at least a floor, atomically: after a restart without persistence the
  counter may have gone back, and the next grant must still be above every token handed out.
  Compares decimal strings (shorter is smaller, equal length compares lexically), so tokens beyond
  2^53 stay exact; tonumber() would round them.
    KEYS[1] token counter
    ARGV[1] floor: a non-negative decimal integer without leading zeros
  Returns
    1    raised to the floor
    0    already at or above it: unchanged
]]
local current = redis.call('GET', KEYS[1]) or '0'
local floor = ARGV[1]
if #current < #floor or (#current == #floor and current < floor) then
  redis.call('SET', KEYS[1], floor)
  return 1
end
return 0
