// sse_event_buffer_test.cpp — the router's event framing (reference/router/sse_event_buffer.h).
//
// Whole events only, whatever the pieces; the end marker seen or not; an
// event over the cap refused; and the time linear in the bytes: a 16 MiB
// event in 1 KiB pieces must not be searched from its start at each piece
// (16,384 pieces: quadratic would read about 137 GB).
#include "reference/router/sse_event_buffer.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/test_util.h"

namespace servelab {
namespace {

TEST(SseEventBuffer, HandsOutWholeEventsWhateverThePieces) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    std::string stream;
    for (int i = 0; i < 50; ++i) {
        stream += "data: {\"n\": " + std::to_string(i) + ", \"text\": \"" +
                  std::string(size_t(random.integer(0, 300)), 'x') + "\"}\n\n";
    }
    stream += "data: [DONE]\n\n";
    SseEventBuffer buffer(1 << 20);
    std::string relayed;
    for (size_t at = 0; at < stream.size();) {
        const size_t piece = size_t(random.integer(1, 97));
        const size_t before = relayed.size();
        ASSERT_TRUE(buffer.append(std::string_view(stream).substr(at, piece), relayed));
        at += piece;
        // Everything handed out is whole events: it ends with a blank line.
        if (relayed.size() > before) ASSERT_EQ(relayed.substr(relayed.size() - 2), "\n\n");
        ASSERT_EQ(relayed.size() + buffer.partial_bytes(), std::min(at, stream.size()));
    }
    EXPECT_EQ(relayed, stream);
    EXPECT_EQ(buffer.partial_bytes(), 0u);
    EXPECT_TRUE(buffer.ended_with_done());
}

TEST(SseEventBuffer, AStreamCutMidEventOrWithoutDoneIsToldApart) {
    SseEventBuffer cut_mid_event(1 << 20);
    std::string relayed;
    ASSERT_TRUE(cut_mid_event.append("data: {\"a\": 1}\n\ndata: {\"b\"", relayed));
    EXPECT_EQ(relayed, "data: {\"a\": 1}\n\n");
    EXPECT_GT(cut_mid_event.partial_bytes(), 0u);
    EXPECT_FALSE(cut_mid_event.ended_with_done());

    SseEventBuffer whole_events_no_done(1 << 20);
    relayed.clear();
    ASSERT_TRUE(whole_events_no_done.append("data: {\"a\": 1}\n\n", relayed));
    EXPECT_EQ(whole_events_no_done.partial_bytes(), 0u);
    EXPECT_FALSE(whole_events_no_done.ended_with_done());

    // "[DONE]" inside another event's text is not the end marker.
    SseEventBuffer done_in_text(1 << 20);
    relayed.clear();
    ASSERT_TRUE(done_in_text.append("data: {\"t\": \"xdata: [DONE]\n\n", relayed));
    EXPECT_FALSE(done_in_text.ended_with_done());
}

TEST(SseEventBuffer, AnEventOverTheCapIsRefused) {
    SseEventBuffer buffer(1000);
    std::string relayed;
    EXPECT_TRUE(buffer.append("data: " + std::string(900, 'x'), relayed));
    EXPECT_FALSE(buffer.append(std::string(200, 'x'), relayed)) << "1,106 bytes, cap 1,000";
    EXPECT_TRUE(relayed.empty());
}

TEST(SseEventBuffer, AHugeEventInSmallPiecesIsSearchedOnce) {
    const size_t event_bytes = 16 << 20;
    SseEventBuffer buffer(event_bytes + 16);
    std::string relayed;
    const std::string piece(1024, 'x');
    ASSERT_TRUE(buffer.append("data: ", relayed));
    for (size_t sent = 0; sent < event_bytes; sent += piece.size()) {
        ASSERT_TRUE(buffer.append(piece, relayed));
    }
    ASSERT_TRUE(buffer.append("\n\n", relayed));
    EXPECT_EQ(relayed.size(), event_bytes + 8);
}

}  // namespace
}  // namespace servelab
