-- wrk script: every request is POST /echo carrying the bytes of one file.
--   wrk -t1 -c100 -d5s -s bench/xkbench/wrk/post.lua http://127.0.0.1:PORT/echo -- BODY_FILE
-- wrk builds the request once, after init, from wrk.method, wrk.body and wrk.headers;
-- it adds Content-Length itself.

function init(args)
    local path = args[1]
    if path == nil then
        error("post.lua needs the body file: wrk ... -s post.lua URL -- FILE")
    end
    local file = assert(io.open(path, "rb"))
    wrk.body = file:read("*a")
    file:close()
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/octet-stream"
end
