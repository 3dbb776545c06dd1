--[[
  Give a lease up, only if it is held by this holder under this token (compare-and-DEL), and wake
  the waiters.
    KEYS[1] lease key
    ARGV[1] expected value "<token>:<holder>"
    ARGV[2] change channel of this lease name
  Returns
    1    released (and "released" PUBLISHed on the channel)
    -3   not the holder: nothing changed
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return -3
