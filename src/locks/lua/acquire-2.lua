--[[
  Take a lease if it is free (SET NX PX semantics), or re-enter it if this holder already has it.
  The fencing token comes from INCR in this same script, so no grant can ever reuse a token.
    KEYS[1] lease key       value "<token>:<holder>", expires after ttl
    KEYS[2] token counter   only ever grows (INCR, or raised by raise-floor-1.lua)
    ARGV[1] holder id
    ARGV[2] ttl in ms
    ARGV[3] change channel of this lease name (PUBLISHed on a new grant)
    ARGV[4] token floor: a decimal integer without leading zeros; a new token is always above it
            (the caller's highest token seen, which a restart without persistence may have reset)
  Returns
    { 1, token }                  granted: a new tenure, or a re-entry that keeps its token and is extended
    { -1, pttl, holder, token }   held by someone else under token; pttl = ms until the backend expires it
  Tokens travel as decimal strings: Lua numbers are doubles and would round tokens above 2^53, so
  the new token is read back with GET after INCR rather than taken from INCR's reply.
]]
local current = redis.call('GET', KEYS[1])
if current then
  local sep = string.find(current, ':', 1, true)
  local holder = string.sub(current, sep + 1)
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return { 1, string.sub(current, 1, sep - 1) }
  end
  return { -1, redis.call('PTTL', KEYS[1]), holder, string.sub(current, 1, sep - 1) }
end
-- Compare decimal strings (shorter is smaller): tonumber() would round tokens above 2^53.
local counter = redis.call('GET', KEYS[2]) or '0'
local floor = ARGV[4]
if #counter < #floor or (#counter == #floor and counter < floor) then
  redis.call('SET', KEYS[2], floor)
end
redis.call('INCR', KEYS[2])
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'acquired')
return { 1, token }
