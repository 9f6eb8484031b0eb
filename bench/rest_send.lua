-- wrk script of bench/rest.py: POST /v1/messages with JSON bodies, each with its sender's key.
--
--   wrk -t1 -c32 -d10s -s bench/rest_send.lua URL -- AGENTS_FILE
--
-- AGENTS_FILE holds "name key" lines. Request i is sent by agent i (mod n) to agent i + 1, so
-- every inbox grows at the same pace. Each response's status is counted: 2xx are sends, any
-- other is an error (per status in the result line). `done` prints one line:
--   AGENTPOST_RESULT {json}

local agents = {}
local n = 0
local threads = {}

local BODY = "Please review the migration in PR 42 before the release; the index on deliveries moved."

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do
    local name, key = line:match("^(%S+)%s+(%S+)$")
    if name then
      table.insert(agents, { name = name, auth = "Bearer " .. key })
    end
  end
  ok = 0
  bad = 0
  statuses = {}
end

function request()
  n = n + 1
  local from = agents[(n % #agents) + 1]
  local to = agents[((n + 1) % #agents) + 1]
  local body = string.format('{"to": "%s", "body": "%s (%d)"}', to.name, BODY, n)
  local headers = { ["Authorization"] = from.auth, ["Content-Type"] = "application/json" }
  return wrk.format("POST", "/v1/messages", headers, body)
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    ok = ok + 1
  else
    bad = bad + 1
    local key = tostring(status)
    statuses[key] = (statuses[key] or 0) + 1
  end
end

function done(summary, latency, requests)
  local total_ok, total_bad = 0, 0
  local by_status = {}
  for _, thread in ipairs(threads) do
    total_ok = total_ok + thread:get("ok")
    total_bad = total_bad + thread:get("bad")
    for status, count in pairs(thread:get("statuses")) do
      by_status[status] = (by_status[status] or 0) + count
    end
  end
  local parts = {}
  for status, count in pairs(by_status) do
    table.insert(parts, string.format('"%s": %d', status, count))
  end
  local e = summary.errors
  io.write(string.format(
    'AGENTPOST_RESULT {"requests": %d, "duration_us": %d, "ok": %d, "non2xx": %d, ' ..
    '"statuses": {%s}, "connect": %d, "read": %d, "write": %d, "timeout": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, total_ok, total_bad, table.concat(parts, ", "),
    e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
