-- wrk script for bench/load.py: replays recorded tile URLs (one per line in the file given
-- after `--`), each thread starting at its own offset, and prints one JSON result line. Every request
-- asks as Chromium's fetch() does (Accept-Encoding: gzip, deflate, br, zstd), so a server that
-- negotiates compression sends what a browser would get.
local urls = {}
local counter = 0
local thread_id = 0
local threads = {}
local headers = { ["Accept-Encoding"] = "gzip, deflate, br, zstd", ["Accept"] = "*/*" }

function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then urls[#urls + 1] = line end
  end
  counter = (id or 0) * 7919
end

function request()
  counter = counter + 1
  return wrk.format("GET", urls[(counter % #urls) + 1], headers)
end

function done(summary, latency, requests)
  local e = summary.errors
  local errors = e.connect + e.read + e.write + e.timeout + e.status
  io.write(string.format('RESULT {"requests": %d, "rps": %.3f, "p50": %.3f, "p95": %.3f, "p99": %.3f, "errors": %d}\n',
    summary.requests, summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(95) / 1000, latency:percentile(99) / 1000, errors))
end
