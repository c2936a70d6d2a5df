# Sampling and chat templates, included from this folder's CMakeLists.txt into pc_engine.
target_sources(pc_engine PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/sampler.cc
    ${CMAKE_CURRENT_LIST_DIR}/chat_template.cc)
pc_add_test(sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc LIBS pc_engine)
pc_add_test(chat_template_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.cc
    LIBS pc_engine)
pc_add_test(chat_template_conformance_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_template_conformance_test.cc
    LIBS pc_engine pc_jinja_reference)
