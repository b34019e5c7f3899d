// http_listener.cpp — see http_listener.h.
#include "reference/server/http_listener.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <string_view>

namespace servelab {
namespace {

// httplib's accept loop hands each socket to a task queue; ours runs the
// task at once, on the accept thread: process_and_close_socket only passes
// the socket on, so accepting never waits for a thread.
class RunAtOnce : public httplib::TaskQueue {
  public:
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
};

const char* reason_phrase(int status) {
    switch (status) {
        case 400:
            return "Bad Request";
        case 408:
            return "Request Timeout";
        case 431:
            return "Request Header Fields Too Large";
        case 501:
            return "Not Implemented";
        case 503:
            return "Service Unavailable";
        default:
            return "Error";
    }
}

bool head_complete(const std::string& bytes) {
    return bytes.find("\r\n\r\n") != std::string::npos;
}

// "GET /health?x HTTP/1.1" → method "GET", path "/health".
std::pair<std::string, std::string> request_line(const std::string& head) {
    const std::string_view line = std::string_view(head).substr(0, head.find("\r\n"));
    const size_t method_end = line.find(' ');
    if (method_end == std::string_view::npos) return {std::string(line), ""};
    std::string_view target = line.substr(method_end + 1);
    target = target.substr(0, std::min(target.find(' '), target.find('?')));
    return {std::string(line.substr(0, method_end)), std::string(target)};
}

std::string lowercase(std::string_view text) {
    std::string lower(text);
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    return lower;
}

std::string_view trimmed(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
    return text;
}

// Why the head's framing headers contradict each other, or "" when they do
// not. Where the body ends must have one answer: two different
// Content-Lengths, or a Content-Length beside a Transfer-Encoding, are how
// a request is smuggled past one reader and seen differently by the next
// (RFC 9112, section 6.3), so they are refused, not resolved.
std::string framing_problem(const std::string& bytes) {
    const std::string_view head = std::string_view(bytes).substr(0, bytes.find("\r\n\r\n"));
    std::string content_length;
    bool transfer_encoding = false;
    for (size_t start = head.find("\r\n"); start != std::string_view::npos;) {
        const size_t end = head.find("\r\n", start + 2);
        const std::string_view line = head.substr(start + 2, end - (start + 2));
        start = end;
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        const std::string name = lowercase(trimmed(line.substr(0, colon)));
        const std::string_view value = trimmed(line.substr(colon + 1));
        if (name == "transfer-encoding") transfer_encoding = true;
        if (name != "content-length") continue;
        if (!content_length.empty() && content_length != value) {
            return "two different Content-Length headers";
        }
        content_length = value;
    }
    if (transfer_encoding && !content_length.empty()) {
        return "both Content-Length and Transfer-Encoding";
    }
    return "";
}

// The methods the library knows how to frame. Any other (PRI, or a typo)
// would have its body read whole into memory before being answered.
bool is_known_method(const std::string& method) {
    for (const char* known : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
        if (method == known) return true;
    }
    return false;
}

// Cheap and never blocking on the engine: these may use the reserved workers.
bool is_cheap(const std::string& method, const std::string& path) {
    return method == "GET" && (path == "/health" || path == "/metrics" || path == "/v1/models");
}

// Best effort, never blocking: a refusal is small enough for the socket's
// send buffer, and a client that cannot take it is gone anyway.
void send_now(int fd, const std::string& bytes) {
    [[maybe_unused]] const ssize_t n =
        send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

std::string refusal_response(int status, const std::string& body) {
    return fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n{}",
        status, reason_phrase(status), body.size(), body);
}

}  // namespace

HttpListener::HttpListener(
    ListenerLimits limits,
    std::function<std::string(int status, const std::string& message)> error_body,
    std::function<void(const Refusal&)> on_refused)
    : limits_(limits), error_body_(std::move(error_body)), on_refused_(std::move(on_refused)) {
    new_task_queue = [] { return new RunAtOnce; };
    // What the library's Keep-Alive header announces is what serve_request enforces.
    set_keep_alive_max_count(size_t(limits_.max_requests_per_connection));
    set_keep_alive_timeout(
        std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive_timeout).count());
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

HttpListener::~HttpListener() {
    if (wake_fd_ >= 0) close(wake_fd_);
}

bool HttpListener::serve() {
    // httplib listens with a backlog of 5: a burst of clients would be
    // refused by the kernel before the accept loop sees them.
    ::listen(svr_sock_, limits_.listen_backlog);
    reader_ = std::thread([this] { read_heads(); });
    const int num_workers = limits_.max_connections + limits_.reserved_connections;
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { work(); });

    const bool ok = listen_after_bind();  // the accept loop, until stop()

    // The listener is closed. Workers finish the requests they hold (each
    // wait in them has a deadline), then the reader closes what is left.
    {
        std::lock_guard lock(jobs_mutex_);
        jobs_closed_ = true;
    }
    jobs_ready_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    reader_.join();
    return ok;
}

void HttpListener::begin_drain() {
    draining_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

bool HttpListener::client_connected(const httplib::Request& request) const {
    std::lock_guard lock(serving_mutex_);
    const auto it = serving_.find({request.remote_addr, request.remote_port});
    return it == serving_.end() || !peer_has_closed(it->second->fd);
}

void HttpListener::close_after_response(const httplib::Request& request) {
    std::lock_guard lock(serving_mutex_);
    const auto it = serving_.find({request.remote_addr, request.remote_port});
    if (it != serving_.end()) it->second->close_after_response = true;
}

bool HttpListener::process_and_close_socket(socket_t sock) {
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
    const int yes = 1;
    // Streamed tokens are small writes; Nagle's algorithm would hold them back.
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    auto connection = std::make_unique<Connection>(sock);
    if (open_connections_ >= limits_.max_open_connections) {
        send_now(sock, refusal_response(503, error_body_(503, "too many open connections")));
        on_refused_({503, "", ""});
        return true;  // `connection` closes the socket
    }
    ++open_connections_;
    Held held;
    held.connection = std::move(connection);
    held.deadline = SteadyClock::now() + limits_.header_timeout;
    hand_to_reader(std::move(held));
    return true;
}

void HttpListener::hand_to_reader(Held held) {
    {
        std::lock_guard lock(inbox_mutex_);
        inbox_.push_back(std::move(held));
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void HttpListener::read_heads() {
    std::vector<Held> held;
    std::vector<pollfd> polled;
    while (!stopping_) {
        std::vector<Held> arrived;
        {
            std::lock_guard lock(inbox_mutex_);
            arrived.swap(inbox_);
        }
        for (Held& h : arrived) {
            // A returned connection may already hold its next (pipelined) head.
            if (h.phase == Phase::kHead && head_complete(h.connection->pending)) {
                dispatch(h);
                if (!h.connection) continue;
            }
            held.push_back(std::move(h));
        }
        if (draining_) {  // idle keep-alive connections will not be used again
            for (Held& h : held) {
                if (h.phase == Phase::kHead && h.idle) start_closing(h);
            }
        }

        polled.assign(1, pollfd{wake_fd_, POLLIN, 0});
        auto next_deadline = SteadyClock::now() + std::chrono::milliseconds(100);
        for (const Held& h : held) {
            polled.push_back({h.connection->fd, POLLIN, 0});
            next_deadline = std::min(next_deadline, h.deadline);
        }
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline -
                                                                                SteadyClock::now());
        poll(polled.data(), polled.size(), int(std::max<int64_t>(0, wait.count()) + 1));
        if (polled[0].revents != 0) {
            uint64_t count = 0;
            [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
        }

        const auto now = SteadyClock::now();
        for (size_t i = 0; i < held.size(); ++i) {
            Held& h = held[i];
            bool finished = false;
            if (polled[i + 1].revents != 0) finished = !read_available(h);
            if (!finished && h.connection && h.phase == Phase::kHead) {
                if (head_complete(h.connection->pending)) {
                    dispatch(h);
                } else if (h.connection->pending.size() > limits_.max_head_bytes) {
                    refuse(
                        h, 431,
                        fmt::format("the request head exceeds {} bytes", limits_.max_head_bytes));
                } else if (now >= h.deadline) {
                    if (h.connection->pending.empty()) {
                        finished = true;  // connected (or kept alive) and never spoke
                    } else {
                        refuse(h, 408,
                               fmt::format("the request head did not arrive within {} ms",
                                           limits_.header_timeout.count()));
                    }
                }
            } else if (!finished && h.connection && now >= h.deadline) {
                finished = true;  // lingered long enough
            }
            if (finished) {
                h.connection.reset();
                --open_connections_;
            }
        }
        // Keep only the connections still watched here (the others went to a
        // worker, or are closed).
        std::erase_if(held, [](const Held& h) { return !h.connection; });
    }
    // Stopping: whatever still waits here is closed unanswered (its
    // request never began).
}

bool HttpListener::read_available(Held& held) {
    Connection& c = *held.connection;
    char buffer[16384];
    while (true) {
        const ssize_t n = recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (n == 0) return false;  // the client closed
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (held.phase == Phase::kClosing) continue;  // discarded
        if (held.idle) {  // the next request has begun: its head has a deadline now
            held.idle = false;
            held.deadline = SteadyClock::now() + limits_.header_timeout;
        }
        c.pending.append(buffer, size_t(n));
        if (c.pending.size() > limits_.max_head_bytes) return true;
    }
}

void HttpListener::dispatch(Held& held) {
    const auto [method, path] = request_line(held.connection->pending);
    if (!is_known_method(method)) {
        refuse(held, 501, fmt::format("the method '{}' is not served here", method.substr(0, 32)));
        return;
    }
    if (const std::string problem = framing_problem(held.connection->pending); !problem.empty()) {
        refuse(held, 400, "the request's framing is ambiguous: " + problem);
        return;
    }
    Job job;
    if (busy_workers_ < limits_.max_connections) {
        ++busy_workers_;
    } else if (is_cheap(method, path) && busy_reserved_ < limits_.reserved_connections) {
        ++busy_reserved_;
        job.reserved_slot = true;
    } else {
        refuse(held, 503,
               fmt::format("the server is at capacity: {} connections are being served "
                           "(--max-connections)",
                           limits_.max_connections));
        return;
    }
    job.connection = std::move(held.connection);
    {
        std::lock_guard lock(jobs_mutex_);
        jobs_.push_back(std::move(job));
    }
    jobs_ready_.notify_one();
}

void HttpListener::refuse(Held& held, int status, const std::string& message) {
    const auto [method, path] = request_line(held.connection->pending);
    send_now(held.connection->fd, refusal_response(status, error_body_(status, message)));
    on_refused_({status, method, path});
    start_closing(held);
}

void HttpListener::start_closing(Held& held) {
    shutdown(held.connection->fd, SHUT_WR);
    held.connection->pending.clear();
    held.phase = Phase::kClosing;
    held.deadline = SteadyClock::now() + limits_.linger_timeout;
}

void HttpListener::work() {
    while (true) {
        Job job;
        {
            std::unique_lock lock(jobs_mutex_);
            jobs_ready_.wait(lock, [&] { return !jobs_.empty() || jobs_closed_; });
            if (jobs_.empty()) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        serve_request(std::move(job));
    }
}

void HttpListener::serve_request(Job job) {
    Connection& c = *job.connection;
    const Peer peer{c.remote_ip, c.remote_port};
    {
        std::lock_guard lock(serving_mutex_);
        serving_[peer] = &c;
    }
    ConnectionStream stream(c, SteadyClock::now() + limits_.body_timeout, limits_.write_timeout);
    bool client_asked_close = false;
    const bool written = process_request(stream, draining_, client_asked_close, nullptr);
    {
        std::lock_guard lock(serving_mutex_);
        serving_.erase(peer);
    }
    ++c.requests_served;
    const bool keep_alive = written && !client_asked_close && !stream.failed() &&
                            !c.close_after_response && !draining_ &&
                            c.requests_served < limits_.max_requests_per_connection;
    if (job.reserved_slot) {
        --busy_reserved_;
    } else {
        --busy_workers_;
    }
    Held held;
    held.connection = std::move(job.connection);
    if (keep_alive) {
        held.idle = held.connection->pending.empty();
        held.deadline =
            SteadyClock::now() + (held.idle ? limits_.keep_alive_timeout : limits_.header_timeout);
    } else {
        start_closing(held);
    }
    hand_to_reader(std::move(held));
}

}  // namespace servelab
