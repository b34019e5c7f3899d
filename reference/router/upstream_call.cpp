// upstream_call.cpp — see upstream_call.h.
#include "reference/router/upstream_call.h"

namespace servelab {

UpstreamCall::UpstreamCall(const BackendUrl& backend, std::string path, std::string body,
                           httplib::Headers headers, UpstreamTimeouts timeouts,
                           std::function<void()> on_end)
    : client_(backend.host, backend.port), on_end_(std::move(on_end)) {
    client_.set_connection_timeout(timeouts.connect);
    client_.set_read_timeout(timeouts.read);
    client_.set_write_timeout(timeouts.connect);
    request_.method = "POST";
    request_.path = std::move(path);
    request_.headers = std::move(headers);
    request_.headers.emplace("Content-Type", "application/json");
    request_.body = std::move(body);
    request_.response_handler = [this](const httplib::Response& response) {
        std::lock_guard<std::mutex> lock(mutex_);
        status_ = response.status;
        content_type_ = response.get_header_value("Content-Type");
        return !cancelled_;
    };
    request_.content_receiver = [this](const char* data, size_t length, uint64_t, uint64_t) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return chunks_.size() < kMaxQueuedChunks || cancelled_; });
        if (cancelled_) return false;  // the client left: drop the backend's connection
        chunks_.emplace_back(data, length);
        body_started_ = true;
        changed_.notify_all();
        return true;
    };
    thread_ = std::thread([this] { run(); });
}

UpstreamCall::~UpstreamCall() {
    cancel();
    thread_.join();
    if (on_end_) on_end_();
}

void UpstreamCall::run() {
    httplib::Response response;
    httplib::Error error = httplib::Error::Success;
    const bool ok = client_.send(request_, response, error);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ok && error == httplib::Error::Success) error = httplib::Error::Unknown;
    error_ = ok ? httplib::Error::Success : error;
    if (ok && status_ == 0) status_ = response.status;  // a 204: no body, no handler call
    ended_ = true;
    changed_.notify_all();
}

bool UpstreamCall::wait_for_start(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, wait, [this] { return body_started_ || ended_; });
}

UpstreamCall::Pop UpstreamCall::pop(std::string& chunk, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, wait, [this] { return !chunks_.empty() || ended_; });
    if (!chunks_.empty()) {
        chunk = std::move(chunks_.front());
        chunks_.pop_front();
        changed_.notify_all();  // room in the queue for the receiver
        return Pop::kChunk;
    }
    return ended_ ? Pop::kEnd : Pop::kNothingYet;
}

int UpstreamCall::status() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
}

std::string UpstreamCall::content_type() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return content_type_;
}

bool UpstreamCall::failed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ended_ && error_ != httplib::Error::Success;
}

std::string UpstreamCall::failure() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return httplib::to_string(error_);
}

bool UpstreamCall::failed_to_connect() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ended_ &&
           (error_ == httplib::Error::Connection || error_ == httplib::Error::ConnectionTimeout);
}

void UpstreamCall::cancel() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (ended_) return;
        cancelled_ = true;
    }
    changed_.notify_all();
    // Shuts the socket if the call is blocked reading it; a call not yet
    // connected sees cancelled_ at its first callback.
    client_.stop();
}

}  // namespace servelab
