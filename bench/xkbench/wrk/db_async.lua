-- wrk script for `xkbench compare db`'s async-db shape: GET /async-db with a limit drawn from
-- 5 to 50 and a price range of 100 from a random start (the same sequence every run).
--   wrk -t1 -c64 -d5s -s bench/xkbench/wrk/db_async.lua http://127.0.0.1:PORT
math.randomseed(1)

request = function()
    local low = math.random(1, 400)
    local path = string.format("/async-db?min=%d&max=%d&limit=%d", low, low + 100, math.random(5, 50))
    return wrk.format("GET", path)
end
