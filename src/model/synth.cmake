# Synthetic-model generator (synth.h): part of pc_model, included from src/model/CMakeLists.txt.
target_sources(pc_model PRIVATE ${CMAKE_CURRENT_LIST_DIR}/synth.cc)
pc_add_test(synth_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/synth_test.cc LIBS pc_model)
