// tiny_model_streaming.cpp — random models of a real size, drawn by many threads and streamed to
// disk.
//
// Part of the test tooling (benchmarks; issue 48). The sequential generator
// (tiny_model.cpp) draws every value from one stream and holds the whole file
// in memory twice: fine for a test model of kilobytes, minutes and tens of
// gigabytes for Llama-3.1-8B's shapes. Here each tensor is cut into chunks of
// whole rows, each chunk with its own generator seeded from (seed, tensor,
// chunk), so the threads draw, quantize and write chunks in any order and the
// file is the same for any thread count. The GPU check writes its 1B and 8B
// files this way on the GPU machine (tools/gpu_check.sh) rather than carry them.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/tiny_model_plan.h"

namespace servelab {
namespace {

// About a million values a chunk: 4 MB of floats per thread, and enough
// chunks in an 8B model's matrices (58 to 500 each) to keep 16 threads busy.
constexpr int64_t kChunkValues = int64_t(1) << 20;

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Near-normal draws, cheap: the sum of four 16-bit uniforms from one 64-bit
// word (Irwin–Hall), centred and scaled to unit variance. Its tails stop at
// ±3.46σ, which a benchmark's random weights do not miss; a log and a cosine
// per draw (Box–Muller) would take longer than quantizing.
class ChunkNormals {
  public:
    ChunkNormals(uint64_t seed, uint64_t tensor, uint64_t chunk) : state_(seed) {
        state_ ^= splitmix64(state_) + tensor * 0x632be59bd9b4e019ULL;
        state_ ^= splitmix64(state_) + chunk * 0x8cb92ba72f3d8dd7ULL;
    }
    float next() {
        const uint64_t word = splitmix64(state_);
        const uint64_t sum =
            (word & 0xffff) + ((word >> 16) & 0xffff) + ((word >> 32) & 0xffff) + (word >> 48);
        // Each lane is uniform on {0..65535}: mean 4 * 32767.5, variance 4 * (65536² - 1) / 12.
        constexpr float kMean = 4.0f * 32767.5f;
        constexpr float kInverseStddev = 1.7320508f / 65536.0f;  // sqrt(12 / 4) / 65536
        return (float(sum) - kMean) * kInverseStddev;
    }

  private:
    uint64_t state_;
};

struct Chunk {
    size_t tensor;
    uint64_t index_in_tensor;  // with the seed and the tensor, what seeds its draws
    int64_t first_row;
    int64_t num_rows;
};

std::vector<Chunk> cut_into_chunks(const std::vector<TinyTensorPlan>& tensors) {
    std::vector<Chunk> chunks;
    for (size_t t = 0; t < tensors.size(); ++t) {
        const int64_t row_length = tensors[t].dims[0];
        const int64_t rows = tensors[t].num_values() / row_length;
        const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkValues / row_length);
        for (int64_t first = 0; first < rows; first += rows_per_chunk) {
            chunks.push_back({t, uint64_t(first / rows_per_chunk), first,
                              std::min(rows_per_chunk, rows - first)});
        }
    }
    return chunks;
}

// Draws one chunk's values and quantizes them to the tensor's type.
std::vector<uint8_t> draw_chunk(const TinyTensorPlan& tensor, const Chunk& chunk, uint64_t seed) {
    ChunkNormals normal(seed, chunk.tensor, chunk.index_in_tensor);
    std::vector<float> values(size_t(chunk.num_rows * tensor.dims[0]));
    if (tensor.init == TinyInit::kNorm) {
        for (float& v : values) v = 1.0f + 0.1f * normal.next();
    } else {
        for (float& v : values) v = normal.next() * tensor.scale;
    }
    return quantize_row(tensor.type, values);
}

class MemorySink final : public TinyModelSink {
  public:
    void reserve(uint64_t file_bytes) override { bytes.assign(size_t(file_bytes), 0); }
    void write(uint64_t offset, const uint8_t* data, size_t size) override {
        std::memcpy(bytes.data() + offset, data, size);
    }
    std::vector<uint8_t> bytes;
};

// pwrite at each range's offset; the padding between tensors is the zeros
// ftruncate leaves.
class FileSink final : public TinyModelSink {
  public:
    explicit FileSink(const std::string& path) : path_(path) {
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd_ < 0) fail(errno);
    }
    ~FileSink() override {
        if (fd_ >= 0) ::close(fd_);
    }
    FileSink(const FileSink&) = delete;
    FileSink& operator=(const FileSink&) = delete;
    void reserve(uint64_t file_bytes) override {
        if (::ftruncate(fd_, off_t(file_bytes)) != 0) fail(errno);
    }
    void write(uint64_t offset, const uint8_t* data, size_t size) override {
        while (size > 0) {
            const ssize_t n = ::pwrite(fd_, data, size, off_t(offset));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(n < 0 ? errno : ENOSPC);
            data += n;
            offset += uint64_t(n);
            size -= size_t(n);
        }
    }
    void close() {
        const int fd = fd_;
        fd_ = -1;
        if (::close(fd) != 0) fail(errno);
    }

  private:
    [[noreturn]] void fail(int error) const {
        throw Error("cannot write '" + path_ + "': " + std::strerror(error));
    }
    std::string path_;
    int fd_ = -1;
};

}  // namespace

void stream_tiny_model(const TinyModelOptions& options, TinyModelSink& sink) {
    TinyModelPlan plan = plan_tiny_model(options);
    for (const TinyTensorPlan& tensor : plan.tensors) {
        plan.metadata.add_tensor_layout(tensor.name, tensor.dims, tensor.type);
    }
    const std::vector<uint8_t> header = plan.metadata.header_bytes();
    const std::vector<uint64_t> offsets = plan.metadata.tensor_data_offsets();
    sink.reserve(header.size() + plan.metadata.data_section_bytes());
    sink.write(0, header.data(), header.size());

    const std::vector<Chunk> chunks = cut_into_chunks(plan.tensors);
    std::atomic<size_t> next_chunk{0};
    std::atomic<bool> failed{false};  // the other threads stop at their next chunk
    std::mutex error_mutex;
    std::exception_ptr first_error;
    const auto worker = [&] {
        try {
            for (size_t i = next_chunk++; i < chunks.size() && !failed; i = next_chunk++) {
                const Chunk& chunk = chunks[i];
                const TinyTensorPlan& tensor = plan.tensors[chunk.tensor];
                const std::vector<uint8_t> bytes = draw_chunk(tensor, chunk, options.seed);
                const uint64_t row_bytes = uint64_t(row_size_bytes(tensor.type, tensor.dims[0]));
                sink.write(
                    header.size() + offsets[chunk.tensor] + uint64_t(chunk.first_row) * row_bytes,
                    bytes.data(), bytes.size());
            }
        } catch (...) {
            const std::lock_guard<std::mutex> lock(error_mutex);
            if (!first_error) first_error = std::current_exception();
            failed = true;
        }
    };
    std::vector<std::thread> threads;
    for (int64_t t = 1; t < std::max<int64_t>(1, options.write_threads); ++t) {
        threads.emplace_back(worker);
    }
    worker();
    for (std::thread& thread : threads) thread.join();
    if (first_error) std::rethrow_exception(first_error);
}

std::vector<uint8_t> make_tiny_model_streaming(const TinyModelOptions& options) {
    MemorySink sink;
    stream_tiny_model(options, sink);
    return std::move(sink.bytes);
}

void write_tiny_model_streaming(const TinyModelOptions& options, const std::string& path) {
    FileSink sink(path);
    stream_tiny_model(options, sink);
    sink.close();
}

}  // namespace servelab
