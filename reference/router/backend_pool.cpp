// backend_pool.cpp — see backend_pool.h.
#include "reference/router/backend_pool.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "kernels/common/error.h"

namespace servelab {

BackendUrl parse_backend_url(const std::string& url) {
    const auto refuse = [&](const std::string& why) {
        throw Error("backend '" + url + "': " + why + " (expected http://HOST:PORT)");
    };
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) refuse("not an http:// URL");
    std::string rest = url.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) refuse("no port");
    BackendUrl parsed;
    parsed.host = rest.substr(0, colon);
    const std::string port = rest.substr(colon + 1);
    if (parsed.host.empty()) refuse("no host");
    for (const char c : parsed.host) {
        if (!std::isalnum(uint8_t(c)) && c != '.' && c != '-' && c != '_') {
            refuse("the host may hold only letters, digits, '.', '-' and '_' (no path, no user)");
        }
    }
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(uint8_t(c)); })) {
        refuse("the port is not a number");
    }
    parsed.port = std::stoi(port);
    if (parsed.port < 1 || parsed.port > 65535) refuse("the port is not in 1..65535");
    return parsed;
}

BackendPool::BackendPool(std::vector<BackendUrl> backends, RoutingPolicy policy,
                         HealthCheckOptions health)
    : backends_(std::move(backends)),
      health_(health),
      policy_(std::move(policy)),
      healthy_(backends_.size(), true),
      outstanding_(backends_.size(), 0),
      requests_total_(backends_.size(), 0) {
    if (backends_.empty()) throw Error("the router needs at least one backend");
}

BackendPool::~BackendPool() {
    stop_health_checks();
}

bool BackendPool::probe(int backend, std::string& why) const {
    const BackendUrl& url = backends_[size_t(backend)];
    httplib::Client client(url.host, url.port);
    client.set_connection_timeout(health_.timeout);
    client.set_read_timeout(health_.timeout);
    client.set_write_timeout(health_.timeout);
    const httplib::Result result = client.Get("/health");
    if (!result) {
        why = "GET /health: " + httplib::to_string(result.error());
        return false;
    }
    if (result->status != 200) {
        why = "GET /health answered " + std::to_string(result->status);
        return false;
    }
    return true;
}

void BackendPool::set_health(int backend, bool healthy, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (healthy_[size_t(backend)] == healthy) return;
    healthy_[size_t(backend)] = healthy;
    if (healthy) {
        spdlog::info("backend {} is back (its health check passed)",
                     backends_[size_t(backend)].text());
    } else {
        spdlog::warn("backend {} taken out: {}", backends_[size_t(backend)].text(), why);
    }
}

void BackendPool::check_all_now() {
    for (int backend = 0; backend < size(); ++backend) {
        std::string why;
        const bool healthy = probe(backend, why);
        set_health(backend, healthy, why);
    }
}

void BackendPool::health_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        // Probes run without the lock: one slow backend must not stall routing.
        lock.unlock();
        check_all_now();
        lock.lock();
        stop_signal_.wait_for(lock, health_.interval, [this] { return stopping_; });
    }
}

void BackendPool::start_health_checks() {
    health_thread_ = std::thread([this] { health_loop(); });
}

void BackendPool::stop_health_checks() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    stop_signal_.notify_all();
    if (health_thread_.joinable()) health_thread_.join();
}

RouteDecision BackendPool::acquire(const std::vector<uint64_t>& block_keys,
                                   const std::vector<bool>& tried) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<BackendLoad> loads(backends_.size());
    for (size_t i = 0; i < backends_.size(); ++i) {
        loads[i] = {healthy_[i] && !tried[i], outstanding_[i]};
    }
    const RouteDecision decision = policy_.route(block_keys, loads);
    if (decision.backend >= 0) {
        ++outstanding_[size_t(decision.backend)];
        ++requests_total_[size_t(decision.backend)];
    }
    return decision;
}

void BackendPool::release(int backend) {
    std::lock_guard<std::mutex> lock(mutex_);
    --outstanding_[size_t(backend)];
}

void BackendPool::mark_down(int backend, const std::string& why) {
    set_health(backend, false, why);
}

bool BackendPool::is_healthy(int backend) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return healthy_[size_t(backend)];
}

std::vector<int> BackendPool::healthy_backends() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int> healthy;
    for (int i = 0; i < int(backends_.size()); ++i) {
        if (healthy_[size_t(i)]) healthy.push_back(i);
    }
    return healthy;
}

std::vector<BackendStats> BackendPool::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<BackendStats> all;
    for (size_t i = 0; i < backends_.size(); ++i) {
        all.push_back(
            {backends_[i].text(), bool(healthy_[i]), outstanding_[i], requests_total_[i]});
    }
    return all;
}

int64_t BackendPool::total_outstanding() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t total = 0;
    for (const int64_t count : outstanding_) total += count;
    return total;
}

}  // namespace servelab
