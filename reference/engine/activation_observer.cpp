// activation_observer.cpp — see activation_observer.h.
#include "reference/engine/activation_observer.h"

namespace servelab {

std::string_view linear_input_name(LinearInput input) {
    switch (input) {
        case LinearInput::kAttentionIn:
            return "attention input (q, k, v)";
        case LinearInput::kAttentionOut:
            return "attention output (o)";
        case LinearInput::kMlpIn:
            return "mlp input (gate, up)";
        case LinearInput::kMlpHidden:
            return "mlp hidden (down)";
    }
    return "?";
}

}  // namespace servelab
