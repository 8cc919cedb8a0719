-- wrk script: every write carries 16 pipelined GET requests of one path (the
-- argument, /ping by default). wrk parses the string once at start-up, sees 16
-- requests, and then counts each of the 16 responses as a completed request
-- before it writes the next batch.
--   wrk -t1 -c100 -d5s -s bench/xkbench/wrk/pipeline.lua http://127.0.0.1:PORT [-- PATH]

local depth = 16
local batch

function init(args)
    local requests = {}
    for i = 1, depth do
        requests[i] = wrk.format("GET", args[1] or "/ping")
    end
    batch = table.concat(requests)
end

function request()
    return batch
end
