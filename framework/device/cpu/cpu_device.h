#pragma once

#include <memory>

#include "framework/device/allocator.h"

namespace mg {

std::unique_ptr<Stream> make_cpu_stream();
std::unique_ptr<Event> make_cpu_event();
Allocator& cpu_allocator();

}  // namespace mg
