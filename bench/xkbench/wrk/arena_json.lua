-- wrk script for the arena's json-tls profile: requests rotate over seven GET /json/{count}?m={m}
-- (the pairs are xkbench's own choice, from 1 to all 50 items of the dataset).
--   wrk -t1 -c64 -d5s -s bench/xkbench/wrk/arena_json.lua https://127.0.0.1:PORT

local pairs_asked = {{1, 1}, {5, 2}, {10, 3}, {15, 4}, {25, 5}, {40, 6}, {50, 7}}
local requests = {}
local sent = 0

function init(args)
    for i, pair in ipairs(pairs_asked) do
        requests[i] = wrk.format("GET", string.format("/json/%d?m=%d", pair[1], pair[2]))
    end
end

function request()
    sent = sent + 1
    return requests[sent % #requests + 1]
end
