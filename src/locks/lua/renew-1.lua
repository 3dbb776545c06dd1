--[[
  Extend a lease, only if it is still held by this holder under this token (compare-and-PEXPIRE).
    KEYS[1] lease key
    ARGV[1] expected value "<token>:<holder>"
    ARGV[2] ttl in ms
  Returns
    1    renewed
    -2   lost: expired, or held by someone else or under another token
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return -2
