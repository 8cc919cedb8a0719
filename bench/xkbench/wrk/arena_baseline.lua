-- wrk script for the arena's baseline and limited-conn profiles: requests rotate over the
-- arena's templates, GET /baseline11?a=1&b=1, the same POSTed with body 20 by Content-Length,
-- and chunked. With an argument N, every Nth request carries "Connection: close": the server
-- closes after answering and wrk reconnects, so connections live N requests on average.
--   wrk -t1 -c64 -d5s -s bench/xkbench/wrk/arena_baseline.lua http://127.0.0.1:PORT [-- N]

local templates, closing = {}, {}
local close_every = 0
local sent = 0

-- A template and its "Connection: close" twin; the chunked body is written out by hand
-- because wrk.format adds Content-Length to any body it is given.
local function add(method, headers, body)
    local index = #templates + 1
    local close = {["Connection"] = "close"}
    for name, value in pairs(headers) do close[name] = value end
    local chunked = headers["Transfer-Encoding"] ~= nil
    templates[index] = wrk.format(method, "/baseline11?a=1&b=1", headers, not chunked and body or nil)
        .. (chunked and body or "")
    closing[index] = wrk.format(method, "/baseline11?a=1&b=1", close, not chunked and body or nil)
        .. (chunked and body or "")
end

function init(args)
    close_every = tonumber(args[1] or "0")
    add("GET", {}, nil)
    add("POST", {["Content-Type"] = "text/plain"}, "20")
    add("POST", {["Content-Type"] = "text/plain", ["Transfer-Encoding"] = "chunked"}, "2\r\n20\r\n0\r\n\r\n")
end

function request()
    sent = sent + 1
    local index = sent % #templates + 1
    if close_every > 0 and sent % close_every == 0 then
        return closing[index]
    end
    return templates[index]
end
