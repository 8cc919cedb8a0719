# /baseline11 and /baseline2 of the arena for h2o's mruby handler (bench/peers/h2o/arena.conf.in):
# the sum of every integer query value, plus the request body's integer on a POST.
Proc.new do |env|
  sum = 0
  (env["QUERY_STRING"] || "").split("&").each do |pair|
    value = pair.split("=", 2)[1]
    sum += value.to_i if value && value =~ /\A-?\d+\z/
  end
  if env["REQUEST_METHOD"] == "POST" && env["rack.input"]
    body = env["rack.input"].read.strip
    sum += body.to_i if body =~ /\A-?\d+\z/
  end
  [200, {"content-type" => "text/plain"}, [sum.to_s]]
end
