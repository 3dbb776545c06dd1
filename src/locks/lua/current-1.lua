--[[
  Read a lease and its remaining time in one step (a GET then a PTTL could straddle an expiry).
    KEYS[1] lease key
  Returns
    false                  free
    { value, pttl }        value "<token>:<holder>", pttl = ms until the backend expires it
]]
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return { value, redis.call('PTTL', KEYS[1]) }
