"""Shared by every test folder: this file puts tests/ on sys.path (pytest's rule for a
conftest.py outside packages), so each folder's support module can import
script_modules."""
