// http_connection.h — one client connection: its socket, the bytes read ahead, its deadlines.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// cpp-httplib parses requests and writes responses through a Stream; this
// is ours, so that every wait on the client has a deadline the server
// chooses, not one the client can stretch:
//   - reads wait with poll() until the request's body deadline, never longer;
//   - writes wait until the write deadline (a client that stops reading is
//     dropped instead of holding a thread);
//   - bytes that arrive after one request (a pipelined next request) stay in
//     `pending` and are parsed next, in order, never thrown away.
// The socket is non-blocking; one thread at a time owns a Connection (the
// head reader, or the worker serving its request: http_listener.h).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>

namespace servelab {

using SteadyClock = std::chrono::steady_clock;

struct Connection {
    explicit Connection(int fd);
    ~Connection();  // closes the socket
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    int fd = -1;
    std::string pending;  // read from the socket, not yet parsed
    std::string remote_ip;
    int remote_port = 0;
    std::string local_ip;
    int local_port = 0;
    // A handler asks for this when the stream is out of step with HTTP
    // framing (a body it stopped reading); the connection then closes after
    // the response instead of being kept alive.
    std::atomic<bool> close_after_response{false};
    int requests_served = 0;
};

// True when the peer has closed its side or the socket has failed. Data
// waiting to be read (a pipelined request) means the peer is still there.
bool peer_has_closed(int fd);

class ConnectionStream : public httplib::Stream {
  public:
    ConnectionStream(Connection& connection, SteadyClock::time_point read_deadline,
                     std::chrono::milliseconds write_timeout);

    bool is_readable() const override;
    bool is_writable() const override;
    ssize_t read(char* ptr, size_t size) override;
    ssize_t write(const char* ptr, size_t size) override;
    void get_remote_ip_and_port(std::string& ip, int& port) const override;
    void get_local_ip_and_port(std::string& ip, int& port) const override;
    socket_t socket() const override;

    // A read or write ran out of time or failed: what the client sent next
    // can no longer be framed, so the connection must close.
    bool failed() const { return failed_; }

  private:
    Connection& connection_;
    SteadyClock::time_point read_deadline_;
    std::chrono::milliseconds write_timeout_;
    bool failed_ = false;
};

}  // namespace servelab
