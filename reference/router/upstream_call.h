// upstream_call.h — one request forwarded to one backend, on its own thread,
// its answer relayed through a small queue as it arrives.
//
// Part of the distributed layer (chapter 11.7, "routing"). Why a thread:
// cpp-httplib's client delivers a body through a callback that runs inside
// its blocking call, while the router's HTTP server pulls a streamed body
// from a provider callback on the client connection's thread. A queue
// between the two lets each side run its own loop: the upstream thread
// pushes chunks (waiting when the queue is full, so a slow client slows
// the backend instead of filling the router's memory), and the handler
// pops them. cancel() ends the call from either side: the receiver then
// returns false and the socket is shut, so the backend sees its client
// leave and cancels the request.
//
// A call has "started" once a byte of its body has arrived or it has
// ended. Before that, nothing can have reached the router's client, so a
// failure may be retried on another backend (router_server.h).
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "reference/router/backend_pool.h"

namespace servelab {

struct UpstreamTimeouts {
    std::chrono::milliseconds connect{2000};
    std::chrono::milliseconds read{600000};  // the backend silent this long: failed
};

class UpstreamCall {
  public:
    // Starts POST `path` with `body` (JSON) and `headers` to `backend`.
    // `on_end` runs once, in the destructor (the pool's release()).
    UpstreamCall(const BackendUrl& backend, std::string path, std::string body,
                 httplib::Headers headers, UpstreamTimeouts timeouts, std::function<void()> on_end);
    ~UpstreamCall();  // cancels a call still running, waits for its thread, runs on_end
    UpstreamCall(const UpstreamCall&) = delete;
    UpstreamCall& operator=(const UpstreamCall&) = delete;

    // Waits up to `wait` for the call to start (above); true once it has.
    bool wait_for_start(std::chrono::milliseconds wait);

    enum class Pop { kChunk, kNothingYet, kEnd };
    // The next piece of the body: kChunk (in `chunk`), kNothingYet after
    // `wait` without one, or kEnd once every chunk was popped and the call
    // is over (then failed() says how it ended).
    Pop pop(std::string& chunk, std::chrono::milliseconds wait);

    // After wait_for_start(): the backend's status (0 if it never answered)
    // and Content-Type.
    int status() const;
    std::string content_type() const;
    // Whether the call has ended in a transport failure: no connection, a
    // reset, a timeout, or cancel(). False while it runs.
    bool failed() const;
    // The failure in words ("Connection", "Read", ...), for logs and error bodies.
    std::string failure() const;
    // True if no connection could be made at all: the backend is down.
    bool failed_to_connect() const;

    void cancel();

  private:
    void run();

    static constexpr size_t kMaxQueuedChunks = 64;

    httplib::Client client_;
    httplib::Request request_;
    std::function<void()> on_end_;

    mutable std::mutex mutex_;  // guards everything below
    std::condition_variable changed_;
    int status_ = 0;
    std::string content_type_;
    std::deque<std::string> chunks_;  // received, not yet popped
    bool body_started_ = false;       // a body byte arrived
    bool ended_ = false;
    bool cancelled_ = false;
    httplib::Error error_ = httplib::Error::Success;

    std::thread thread_;  // last: started once everything above exists
};

}  // namespace servelab
