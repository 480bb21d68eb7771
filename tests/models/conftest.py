def pytest_configure(config):
    config.addinivalue_line("markers", "slow: real-model test taking more than 30 s")
