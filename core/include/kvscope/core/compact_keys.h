#pragma once
// CompactKeys: the keys of one KV head's entries with only some channels stored (key-channel
// pruning: SPARK, Liao et al. 2025 §4.2-4.3; ThinK, Xu et al. 2024 §3), and their recovery.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace kvscope {

/// Keys of n entries of head_dim D with only the kept channels stored, plus what recovers the
/// absent ones. Entry t keeps the channels whose bit is set in its row of `kept`; its stored values
/// are values[base_t .. base_t + T_t) in ascending channel order, where base_t = t·stride when every
/// entry keeps the same count (row undefined) and row[t] otherwise. An absent channel j of entry t
/// is recovered as
///
///   k̃_tj = ±scale[t] · inv_a[j]     (sign: bit r of entry t's `sign` row set = negative, r = the
///                                    rank of j among the entry's absent channels)      SPARK §4.3
///   k̃_tj = 0                         (no recovery: sign undefined; ThinK, SPARK recovery=zero)
///
/// and the recovered key k̂_t (kept values as stored, absent channels k̃ rounded to the stored
/// dtype) is what attention reads. Bit j of a packed row is bit j % 8 of byte j / 8.
struct CompactKeys {
  int64_t n = 0;         ///< entries
  int64_t head_dim = 0;  ///< D
  /// uint8 [n, ceil(D/8)] kept-channel bits, or [1, ceil(D/8)] when every entry keeps the same
  /// channels (ThinK).
  at::Tensor kept;
  at::Tensor values;   ///< key dtype [sum_t T_t]: the stored channels, entry by entry
  int64_t stride = 0;  ///< T when every entry keeps T channels (row undefined)
  at::Tensor row;      ///< int64 [n + 1] value offsets when the counts differ (SPARK-p), else undefined
  at::Tensor sign;     ///< uint8 [n, sign_stride]: signs of the absent channels, by rank; undefined: k̃ = 0
  at::Tensor scale;    ///< fp32 [n]: |k̃| before inv_a (SPARK: μ_pruned[t], eq. 11)
  at::Tensor inv_a;    ///< fp32 [D]: per-channel divisor's inverse (SPARK: 1 / a_j, 0 where a_j = 0)

  /// Stores `keys` [n, D] keeping the channels where `mask` (bool [n, D] or [1, D]) is true. With
  /// `scale` fp32 [n] and `inv_a` fp32 [D] defined, the absent channels recover as ±scale·inv_a
  /// with the sign of the original key (SPARK's sign=key refill); else as 0. Throws
  /// std::invalid_argument on mismatched shapes. One host read when the counts differ per entry.
  static CompactKeys pack(const at::Tensor& keys, const at::Tensor& mask, const at::Tensor& scale = {},
                          const at::Tensor& inv_a = {});
  /// bool [n, D]: the kept channels (a [1, D] mask expanded).
  at::Tensor kept_mask() const;
  /// [n, D] in the values' dtype: the recovered keys k̂ (formula above). No host read.
  at::Tensor recover() const;
  /// Bytes held by every tensor (as allocated).
  int64_t bytes() const;
  /// A deep copy.
  CompactKeys clone() const;
};

/// uint8 [rows, ceil(cols/8)]: bit j of row r is bits[r, j] (bool [rows, cols]).
at::Tensor pack_bits(const at::Tensor& bits);
/// bool [rows, cols]: the inverse of pack_bits.
at::Tensor unpack_bits(const at::Tensor& packed, int64_t cols);

}  // namespace kvscope
