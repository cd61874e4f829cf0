"""Tests on a real Ray head. (Not named ``ray``: with tests/ on sys.path a package
named ``ray`` would be imported in place of Ray itself.)"""
