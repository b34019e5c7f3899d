// api_listener.h — the listener every OpenAI-compatible front of servelab serves through.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// `servelab serve` and `servelab route` answer clients with the same rules,
// so they build their listener here, once:
//   - the listener's own refusals (400, 408, 431, 501, 503) carry the API's
//     error body, as every other error does, and are counted in the front's
//     HttpMetrics as its other error answers are;
//   - the port is bound exclusively: cpp-httplib's default adds
//     SO_REUSEPORT, which lets a second process bind the same port and the
//     kernel split the connections between the two, silently. SO_REUSEADDR
//     alone still lets a restarted one bind while the old one's connections
//     sit in TIME_WAIT, but not while another socket listens there;
//   - the library reads at most max_body_bytes of a body by itself (for a
//     route without a content reader); handlers read theirs with
//     request_body.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "reference/server/http_listener.h"
#include "reference/server/server_metrics.h"

namespace servelab {

// `metrics` must outlive the listener.
std::unique_ptr<HttpListener> make_api_listener(const ListenerLimits& limits,
                                                int64_t max_body_bytes, HttpMetrics& metrics);

}  // namespace servelab
