-- wrk script for `xkbench compare db`'s item shapes: GET /api/items/{id}. With no argument the
-- id is drawn from the seed's 100,000 rows; with "hot P", P percent of requests ask for one of
-- 100 hot ids (cached after their first read within each second) and the rest for any row.
--   wrk -t1 -c64 -d5s -s bench/xkbench/wrk/db_items.lua http://127.0.0.1:PORT [-- hot 95]
math.randomseed(1)
local hot_percent = 0

init = function(args)
    if args[1] == "hot" then hot_percent = tonumber(args[2]) end
end

request = function()
    local id
    if math.random(1, 100) <= hot_percent then
        id = math.random(1, 100)
    else
        id = math.random(1, 100000)
    end
    return wrk.format("GET", "/api/items/" .. id)
end
