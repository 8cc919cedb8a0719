// /baseline11 and /baseline2 of the arena for nginx's njs (bench/peers/nginx/arena.conf.in):
// the sum of every integer query value, plus the request body's integer on a POST.
function integer(text) {
    return /^-?\d+$/.test(text) ? parseInt(text, 10) : 0;
}

function querySum(r) {
    let total = 0;
    for (const name in r.args) {
        const values = [].concat(r.args[name]); // njs 0.7 has no for...of
        for (let i = 0; i < values.length; i++) {
            total += integer(String(values[i]));
        }
    }
    return total;
}

// js_content for /baseline11: the query's sum plus a POST's body (which nginx has read by now).
function sum(r) {
    let total = querySum(r);
    if (r.method === 'POST' && r.requestText) {
        total += integer(r.requestText.trim());
    }
    r.headersOut['Content-Type'] = 'text/plain';
    r.return(200, String(total));
}

// js_set for /baseline2, answered by nginx's own `return`: njs 0.7.9's js_content over HTTP/2
// fails to answer streams after h2load resets some ("failed to send response") and then stalls
// the connection's other streams; the profile GETs only, so the query's sum is all it needs.
function queryText(r) {
    return String(querySum(r));
}

export default {sum, queryText};
