// Range checks of the optimizer hyper-parameters, the same as accel/ops/_hyperparameters.py
// makes: every entry point of the kernels repeats them, so that a caller reaching the
// extension without the Python checks (and a bug in them) gets an error naming the
// parameter, its value and the range it must be in, rather than steps that write NaN or
// garbage into the caller's tensors. Each throws std::invalid_argument (ValueError in
// Python). The kernels compute in float32: a value beyond float32's range would become
// inf there, and an epsilon below its smallest (subnormal) value 0.
#pragma once

#include <charconv>
#include <limits>
#include <stdexcept>
#include <string>

namespace accel {

constexpr double kFloat32Max = std::numeric_limits<float>::max();
constexpr double kFloat32Tiny = std::numeric_limits<float>::denorm_min();

// The shortest text that reads back as `value` ("0.1", "-1", "nan", "inf").
inline std::string number_text(double value) {
  char text[64];
  const std::to_chars_result written = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, written.ptr);
}

// A learning rate, weight decay or lr decay: from 0 to float32's largest value (NaN fails).
inline double check_non_negative(double value, const std::string& name) {
  if (!(value >= 0.0 && value <= kFloat32Max))
    throw std::invalid_argument(name + " must be a finite number >= 0 (at most float32's 3.403e+38), got " +
                                number_text(value));
  return value;
}

// A moment's decay rate: in [0, 1).
inline double check_beta(double value, const std::string& name) {
  if (!(value >= 0.0 && value < 1.0))
    throw std::invalid_argument(name + " must be in [0, 1), got " + number_text(value));
  return value;
}

// An epsilon: from float32's smallest positive value to its largest.
inline double check_eps(double value, const std::string& name) {
  if (!(value >= kFloat32Tiny && value <= kFloat32Max))
    throw std::invalid_argument(name +
                                " must be a finite number > 0 that float32 holds (1.401e-45 to 3.403e+38), got " +
                                number_text(value));
  return value;
}

}  // namespace accel
