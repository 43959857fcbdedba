#pragma once
// Plain value types of the views and the command line: which view, plus the figure library's
// selection, compare side and per-figure options (app/figures/figure_options.h) under gui names.
#include <cstddef>
#include <iterator>
#include <optional>
#include <string_view>

#include "figure_options.h"

namespace kvscope::gui {

/// A view of the main window, named by its `--view NAME`. The views, their tab titles, draw
/// functions and figures are one table, in tab order (view_table.cpp); a View is a name in it.
class View {
 public:
  constexpr View() = default;  ///< the Sessions view
  constexpr explicit View(std::string_view name) : name_(name) {}
  constexpr std::string_view name() const { return name_; }
  friend constexpr bool operator==(const View&, const View&) = default;

  /// The views that code outside the table names (a new view needs none; a test checks that each
  /// is in the table).
  static const View kSessions, kRun, kHeads, kTokens, kAttention, kKeys, kChannels, kBudgets, kFidelity, kCompare;

 private:
  std::string_view name_ = "sessions";
};
inline constexpr View View::kSessions{"sessions"};
inline constexpr View View::kRun{"run"};
inline constexpr View View::kHeads{"heads"};
inline constexpr View View::kTokens{"tokens"};
inline constexpr View View::kAttention{"attention"};
inline constexpr View View::kKeys{"keys"};
inline constexpr View View::kChannels{"channels"};
inline constexpr View View::kBudgets{"budgets"};
inline constexpr View View::kFidelity{"fidelity"};
inline constexpr View View::kCompare{"compare"};

/// Every view of the table, in tab order, as a range of View (`for (View v : kAllViews)`).
struct ViewRange {
  struct iterator {
    using iterator_category = std::input_iterator_tag;
    using value_type = View;
    using difference_type = std::ptrdiff_t;
    using pointer = const View*;
    using reference = View;
    std::size_t i = 0;
    View operator*() const;
    iterator& operator++() { return ++i, *this; }
    iterator operator++(int) { return {i++}; }
    friend bool operator==(const iterator&, const iterator&) = default;
  };
  using value_type = View;
  using const_iterator = iterator;
  iterator begin() const { return {0}; }
  iterator end() const;
  std::size_t size() const;
};
inline constexpr ViewRange kAllViews{};

/// The view's name: "sessions", "run", "heads", ... (the `--view NAME` value).
constexpr std::string_view view_name(View v) { return v.name(); }
/// Tab title ("Sessions", "Heads", "Key geometry", ...); "" for a name not in the table.
const char* view_title(View v);
/// The table's view named `name`, or nullopt.
std::optional<View> parse_view(std::string_view name);
/// True for views that draw a figure (exportable).
bool view_has_figure(View v);

using figures::AttentionOptions;
using figures::BudgetsOptions;
using figures::ChannelsOptions;
using figures::FidelityOptions;
using figures::heads_metric_names;
using figures::HeadsOptions;
using figures::KeysOptions;
using figures::Selection;
using figures::Side;
using figures::TokenColoring;
using figures::TokensOptions;

}  // namespace kvscope::gui
