// http_listener.h — how the server accepts connections, reads their requests and hands them out.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// cpp-httplib routes requests and writes responses; this class decides who
// gets a thread and for how long, because the library's own accept path
// (one pooled thread per connection from the moment it connects, an
// unbounded queue behind the pool, no deadline for the request head) lets
// a few slow clients hold every thread:
//
//   accept ──▶ head reader (one thread, poll over every connection)
//                │  head complete ──▶ a worker thread: parse, route, respond
//                │  head too slow ──▶ 408;  too large ──▶ 431;  unknown method ──▶ 501
//                │  ambiguous framing (two Content-Lengths, or one with a
//                │  Transfer-Encoding) ──▶ 400
//                │  every worker busy ──▶ 503 at once (never a silent queue)
//   worker ── response written ──▶ back to the head reader (keep-alive, or
//                                  the next pipelined request, in order)
//
// So a connection holds a thread only while its request is being served:
// waiting for a head costs a poll entry, not a thread. Workers number
// `max_connections`, plus a few reserved for GET /health, /metrics and
// /v1/models, which therefore answer even when every worker streams.
// A connection is closed "lingering": our side shuts down its writes, then
// reads and discards what the client still sends (the rest of a refused
// body) until it closes, so the client reads our answer instead of a reset.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "reference/server/http_connection.h"

namespace servelab {

struct ListenerLimits {
    int max_connections = 512;     // requests served at once (one worker thread each)
    int reserved_connections = 4;  // extra workers for the cheap GETs only
    // Sockets open at once, in any state. Kept below FD_SETSIZE (1024),
    // which cpp-httplib still checks each socket against.
    int max_open_connections = 960;
    std::chrono::milliseconds header_timeout{5000};      // accept (or first byte) → whole head
    std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
    std::chrono::milliseconds body_timeout{30000};       // head → whole body
    std::chrono::milliseconds write_timeout{10000};      // without progress on a write
    std::chrono::milliseconds linger_timeout{3000};      // discarding input after our last byte
    size_t max_head_bytes = 16384;                       // request line + headers
    int listen_backlog = 1024;
    int max_requests_per_connection = 1000;  // then it closes (the Keep-Alive header's max)
};

// What the listener refused on its own, before any handler: for metrics.
struct Refusal {
    int status = 0;  // 400, 408, 431, 501 or 503
    std::string method;
    std::string path;
};

class HttpListener : public httplib::Server {
  public:
    // `error_body(status, message)` renders the body of the listener's own
    // refusals (the server's error format); `on_refused` is told of each.
    HttpListener(ListenerLimits limits,
                 std::function<std::string(int status, const std::string& message)> error_body,
                 std::function<void(const Refusal&)> on_refused);
    ~HttpListener() override;

    // Serves until httplib::Server::stop(); call after bind_to_port. Returns
    // once every connection is closed and every thread has ended.
    bool serve();
    // From now on, responses say "Connection: close" and idle keep-alive
    // connections are closed: the graceful shutdown's first step.
    void begin_drain();
    // For a handler: whether the client that sent `request` is still
    // connected (a non-streaming wait has no write to fail otherwise).
    bool client_connected(const httplib::Request& request) const;
    // For a handler that stops reading a body: close after this response.
    void close_after_response(const httplib::Request& request);

  private:
    enum class Phase { kHead, kClosing };
    struct Held {  // a connection the head reader watches
        std::unique_ptr<Connection> connection;
        Phase phase = Phase::kHead;
        SteadyClock::time_point deadline;
        bool idle = false;  // kept alive; no byte of its next request yet
    };
    struct Job {  // a connection with a whole request head, for a worker
        std::unique_ptr<Connection> connection;
        bool reserved_slot = false;
    };

    // httplib's accept loop calls this (on its own thread, through a task
    // queue that runs it at once): hand the socket to the head reader.
    bool process_and_close_socket(socket_t sock) override;

    void read_heads();  // the head reader thread
    void work();        // a worker thread
    void serve_request(Job job);
    void hand_to_reader(Held held);
    // On the reader thread: pass `held` to a worker, or refuse it.
    void dispatch(Held& held);
    void refuse(Held& held, int status, const std::string& message);
    void start_closing(Held& held);
    // Reads what is there; false when the connection is finished.
    bool read_available(Held& held);

    using Peer = std::pair<std::string, int>;

    ListenerLimits limits_;
    std::function<std::string(int, const std::string&)> error_body_;
    std::function<void(const Refusal&)> on_refused_;

    std::atomic<bool> draining_{false};
    std::atomic<bool> stopping_{false};
    std::atomic<int> open_connections_{0};
    std::atomic<int> busy_workers_{0};   // of max_connections
    std::atomic<int> busy_reserved_{0};  // of reserved_connections

    std::mutex inbox_mutex_;
    std::vector<Held> inbox_;  // accepted or returned, for the reader
    int wake_fd_ = -1;         // an eventfd: the reader's poll wakes on it

    std::mutex jobs_mutex_;
    std::condition_variable jobs_ready_;
    std::deque<Job> jobs_;
    bool jobs_closed_ = false;

    mutable std::mutex serving_mutex_;
    std::map<Peer, Connection*> serving_;  // connections a worker is on, by client address

    std::thread reader_;
    std::vector<std::thread> workers_;
};

}  // namespace servelab
