// http_connection.cpp — see http_connection.h.
#include "reference/server/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace servelab {
namespace {

// "ip", port of a socket address (IPv4 or IPv6).
void describe(const sockaddr_storage& address, std::string& ip, int& port) {
    char text[INET6_ADDRSTRLEN] = {};
    if (address.ss_family == AF_INET) {
        const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
        inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
        port = ntohs(v4.sin_port);
    } else if (address.ss_family == AF_INET6) {
        const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
        inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
        port = ntohs(v6.sin6_port);
    }
    ip = text;
}

// Waits until `fd` is ready for `events` or `deadline` passes; true when
// ready (an error or hang-up counts as ready: the next call reports it).
bool wait_until(int fd, short events, SteadyClock::time_point deadline) {
    while (true) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
        pollfd p{fd, events, 0};
        const int ready = poll(&p, 1, int(std::max<int64_t>(0, left.count())));
        if (ready > 0) return true;
        if (ready == 0) return false;
        if (errno != EINTR) return true;
    }
}

}  // namespace

Connection::Connection(int socket_fd) : fd(socket_fd) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
        describe(address, remote_ip, remote_port);
    }
    length = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
        describe(address, local_ip, local_port);
    }
}

Connection::~Connection() {
    if (fd >= 0) close(fd);
}

bool peer_has_closed(int fd) {
    char byte = 0;
    const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

ConnectionStream::ConnectionStream(Connection& connection, SteadyClock::time_point read_deadline,
                                   std::chrono::milliseconds write_timeout)
    : connection_(connection), read_deadline_(read_deadline), write_timeout_(write_timeout) {}

bool ConnectionStream::is_readable() const {
    return !connection_.pending.empty() || wait_until(connection_.fd, POLLIN, read_deadline_);
}

bool ConnectionStream::is_writable() const {
    return wait_until(connection_.fd, POLLOUT, SteadyClock::now() + write_timeout_) &&
           !peer_has_closed(connection_.fd);
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
    std::string& pending = connection_.pending;
    if (!pending.empty()) {
        const size_t n = std::min(size, pending.size());
        std::memcpy(ptr, pending.data(), n);
        pending.erase(0, n);
        return ssize_t(n);
    }
    while (true) {
        if (!wait_until(connection_.fd, POLLIN, read_deadline_)) {
            failed_ = true;  // the body did not arrive in time
            return -1;
        }
        const ssize_t n = recv(connection_.fd, ptr, size, MSG_DONTWAIT);
        if (n >= 0) return n;
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        failed_ = true;
        return -1;
    }
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
    size_t written = 0;
    while (written < size) {
        // The deadline restarts with every write that makes progress: a slow
        // reader is fine, one that stopped reading is not.
        if (!wait_until(connection_.fd, POLLOUT, SteadyClock::now() + write_timeout_)) {
            failed_ = true;
            return -1;
        }
        const ssize_t n =
            send(connection_.fd, ptr + written, size - written, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            written += size_t(n);
        } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            failed_ = true;
            return -1;
        }
    }
    return ssize_t(size);
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
    ip = connection_.remote_ip;
    port = connection_.remote_port;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
    ip = connection_.local_ip;
    port = connection_.local_port;
}

socket_t ConnectionStream::socket() const {
    return connection_.fd;
}

}  // namespace servelab
