-- wrk script for every benchmark scenario (bench/run.ts and bench/shared.ts pass the arguments,
-- through bench/common.ts):
--   wrk ... -s bench/scenario.lua <url> -- <scenario> <apiKey> <activatePath> <keyPrefix>
-- scenario: whoami | fresh (activate, a new Idempotency-Key per request)
--           | replay (activate, always the same key and body) | mix (9 whoami, then 1 fresh activate)
--           | get, list, page-… (a GET of the path passed as <keyPrefix>: a record by id, a page of activations)
--           | unknown (whoami with a well-formed key whose key id is made up, a new one per request:
--             bench/hostile.ts's flood)
-- response() counts responses by status (wrk's own "status" error counts only >= 400);
-- done() prints one line "BENCH_RESULT {json}" that bench/common.ts reads.

local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

local body = '{"socialUsername":"@bench","plannedPostAt":"2026-12-01"}'

function init(args)
  scenario, api_key, activate_path, key_prefix = args[1], args[2], args[3], args[4]
  counter = 0
  statuses = {}
  auth = "Bearer " .. api_key
  whoami_request = wrk.format("GET", "/v1/whoami", { ["Authorization"] = auth })
  read_request = wrk.format("GET", key_prefix, { ["Authorization"] = auth })
  replay_request = activate_request(key_prefix)
  made_up_secret = string.rep("0", 64)
end

-- cak_<16 hex digits: this thread's number, then the request's>_<secret>: no two alike.
function unknown_request()
  local key = string.format("cak_%08x%08x_%s", thread_id, counter, made_up_secret)
  return wrk.format("GET", "/v1/whoami", { ["Authorization"] = "Bearer " .. key })
end

function activate_request(idempotency_key)
  return wrk.format("POST", activate_path, {
    ["Authorization"] = auth,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = idempotency_key
  }, body)
end

-- Unique across threads (thread_id) and runs (key_prefix is new for every wrk invocation).
function fresh_request()
  return activate_request(key_prefix .. "-" .. thread_id .. "-" .. counter)
end

function request()
  counter = counter + 1
  if scenario == "whoami" then
    return whoami_request
  elseif scenario == "replay" then
    return replay_request
  elseif scenario == "get" or scenario == "list" or scenario:find("^page%-") then
    return read_request
  elseif scenario == "fresh" then
    return fresh_request()
  elseif scenario == "unknown" then
    return unknown_request()
  elseif scenario == "mix" then
    if counter % 10 == 0 then return fresh_request() end
    return whoami_request
  end
  error("unknown scenario: " .. tostring(scenario))
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  -- Responses by status over all threads, and how many of them were not 2xx.
  local by_status, non_2xx = {}, 0
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do
      by_status[status] = (by_status[status] or 0) + count
      if status < 200 or status > 299 then non_2xx = non_2xx + count end
    end
  end
  local status_json = {}
  for status, count in pairs(by_status) do
    table.insert(status_json, string.format('"%d":%d', status, count))
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"durationMicros":%d,"bytes":%d,' ..
    '"non2xx":%d,"statuses":{%s},' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latencyMicros":{"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes, non_2xx, table.concat(status_json, ","),
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
