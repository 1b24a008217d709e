// The user's own nn/nn.h: the data of the regression (a line with noise), nothing of tinyddp's.
#pragma once

namespace downstream {

// The target y = 3 x0 - 2 x1 + 0.5 the model learns.
inline float target(float x0, float x1) { return 3.0f * x0 - 2.0f * x1 + 0.5f; }

}  // namespace downstream
