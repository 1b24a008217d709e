// Everything comm in one include: stores, process groups, the Gloo backend, initialisation.
#pragma once

#include "comm/init.h"
#include "comm/process_group.h"
#include "comm/process_group_gloo.h"
#include "comm/spawn.h"
#include "comm/store.h"
#include "comm/tcp_store.h"
