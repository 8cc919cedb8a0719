-- Tallies answers of xKit's GET /tls by their "resumed" flag over all of wrk's threads and
-- prints "tls-answers resumed R full F" (xkbench/parsing.py reads it):
--   wrk -t1 -c20 -d1s -H "Connection: close" -s bench/xkbench/wrk/resumption.lua https://127.0.0.1:PORT/tls
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) resumed = 0; full = 0 end
function response(status, headers, body)
  if body and string.find(body, '"resumed":true', 1, true) then resumed = resumed + 1
  else full = full + 1 end
end
function done(summary, latency, requests)
  local r, f = 0, 0
  for _, t in ipairs(threads) do r = r + t:get("resumed"); f = f + t:get("full") end
  io.write(string.format("tls-answers resumed %d full %d\n", r, f))
end
